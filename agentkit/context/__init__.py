"""Context management on the run's seam: cache-aware requests (:mod:`.cache`)."""

from .cache import CACHE_ROLE, CacheNote, CacheReport, CacheWatch, TurnCache, cache_report

__all__ = ["CACHE_ROLE", "CacheNote", "CacheReport", "CacheWatch", "TurnCache", "cache_report"]
