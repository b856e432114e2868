"""Context management on the run's seam: cache-aware requests (:mod:`.cache`) and tool search
(:mod:`.search`)."""

from .cache import CACHE_ROLE, CacheNote, CacheReport, CacheWatch, TurnCache, cache_report
from .search import Bm25Index, Catalog, ToolSearch

__all__ = [
    "CACHE_ROLE",
    "Bm25Index",
    "CacheNote",
    "CacheReport",
    "CacheWatch",
    "Catalog",
    "ToolSearch",
    "TurnCache",
    "cache_report",
]
