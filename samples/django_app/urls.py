"""The sample's routes."""

from django.urls import path

from . import views

urlpatterns = [
    path("ask", views.ask),
    path("stream", views.stream),
]
