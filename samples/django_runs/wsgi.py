"""The WSGI application gunicorn serves (``gunicorn -c django_runs/gunicorn.conf.py``)."""

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_runs.settings")
application = get_wsgi_application()
