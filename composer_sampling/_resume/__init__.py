"""Where a fit continues: the resume decided (decide.py) and applied (apply.py), with what both need."""
