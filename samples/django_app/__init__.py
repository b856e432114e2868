"""A minimal Django project serving an agent: a JSON view and a streaming (SSE) view.

Run it: ``python samples/django_app/manage.py runserver`` then
``curl -X POST localhost:8000/ask -d '{"prompt": "Where is order 42?"}'`` or
``curl -N 'localhost:8000/stream?prompt=Where+is+order+42'``.
"""
