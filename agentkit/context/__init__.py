"""Context management on the run's seam: cache-aware requests (:mod:`.cache`), tool search
(:mod:`.search`) and tool-output limits (:mod:`.outputs`)."""

from .cache import CACHE_ROLE, CacheNote, CacheReport, CacheWatch, TurnCache, cache_report
from .outputs import OUTPUT_ROLE, ToolOutputLimit, ToolOutputRecord, output_records
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
    "OUTPUT_ROLE",
    "ToolOutputLimit",
    "ToolOutputRecord",
    "output_records",
]
