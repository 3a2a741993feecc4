"""Reports for people and programs: text tables, JSON, Gantt pictures, explanations."""
