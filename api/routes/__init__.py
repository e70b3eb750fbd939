"""One router per resource; operation ids are the route functions' names (stable)."""
