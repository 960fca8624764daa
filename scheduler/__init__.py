"""scheduler: plan, schedule, what-if, validate, the control loop, actuators."""
