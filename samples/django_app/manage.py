"""Django's command line for the sample: ``python samples/django_app/manage.py runserver``."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # samples/
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_app.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
