"""Where and when: feasibility filters and the variant chooser (the planner comes later)."""
