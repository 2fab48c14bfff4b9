"""Load tests: what to measure next, the load driver, and the closed loop that runs them."""
