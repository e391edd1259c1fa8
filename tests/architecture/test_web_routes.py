"""Page routes share nothing with API route modules: bodies are ``app.web.schemas``, dependencies ``app.web.deps``.

Issue 22 found page routes importing bodies and dependencies from API route modules, so that a change to one API
module broke pages; both now take them from the shared places, and this keeps it so.
"""

from __future__ import annotations

import grimp


def test_no_page_route_imports_an_api_route_module() -> None:
    graph = grimp.build_graph("app", exclude_type_checking_imports=False)
    routes = {m for m in graph.modules if m.startswith("app.web.routes.")}
    pages = {m for m in routes if m.rsplit(".", 1)[1].startswith(("pages", "course_forms"))}
    api = {m for m in routes if m.rsplit(".", 1)[1].startswith("api_")}
    assert pages and api  # the graph is read
    crossing = sorted(f"{p} -> {i}" for p in pages for i in graph.find_modules_directly_imported_by(p) if i in api)
    assert crossing == []
