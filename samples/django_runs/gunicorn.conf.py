"""gunicorn's settings for the sample: three worker processes, each with threads for the event
streams it holds open. Run it from ``samples/``::

    gunicorn -c django_runs/gunicorn.conf.py

A run started by one request runs on a thread of that worker process; any of the three serves
its events and its abort (the session store's run log is what they share)."""

import os

wsgi_app = "django_runs.wsgi:application"
bind = os.environ.get("AGENTKIT_BIND", "127.0.0.1:8000")
workers = 3
worker_class = "gthread"
threads = 16  # an open event stream holds a thread while it waits
graceful_timeout = 5
