"""The HTTP side: API routers, pages and templates, request dependencies, one HTTP mapping of domain errors."""
