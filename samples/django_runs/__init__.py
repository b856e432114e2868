"""A Django site under gunicorn with three worker processes whose runs any worker follows and
aborts (see views.py and docs/runlog.md)."""
