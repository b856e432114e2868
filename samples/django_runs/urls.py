"""The sample's routes."""

from django.urls import path

from . import views

urlpatterns = [
    path("", views.page),
    path("runs", views.start),
    path("runs/<str:run_id>", views.show),
    path("runs/<str:run_id>/events", views.events),
    path("runs/<str:run_id>/abort", views.abort),
    path("runs/<str:run_id>/steer", views.steer),
]
