"""An import-linter contract type: the given packages import only the standard library and an allow-list.

import-linter's own contracts forbid named modules; none allows only a named set, which is what code that runs
inside the sandbox (``worker.runner``) or before it exists (``worker.grading.boot``) needs: anything else is
either absent from the grading image or a way for the project's dependencies into the sandbox. Kept by hand
because no kept library offers it; it is small and uses only import-linter's public contract API.
"""

from __future__ import annotations

import sys

import grimp
from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


class StdlibOnlyContract(Contract):
    """Refuse any import from ``source_modules`` outside the stdlib, the project and ``allowed_external``."""

    type_name = "stdlib_only"

    source_modules = fields.ListField(subfield=fields.StringField())
    allowed_external = fields.ListField(subfield=fields.StringField(), required=False)

    def check(self, graph: grimp.ImportGraph, verbose: bool) -> ContractCheck:
        """Return the imports that break the contract, with their lines."""
        roots = {m.split(".")[0] for m in graph.modules if not graph.is_module_squashed(m)}
        allowed = set(sys.stdlib_module_names) | set(self.allowed_external or []) | roots  # type: ignore[arg-type]
        bad: list[dict[str, object]] = []
        for source in self.source_modules:  # type: ignore[attr-defined]
            for module in sorted({source} | graph.find_descendants(source)):
                for imported in sorted(graph.find_modules_directly_imported_by(module)):
                    if imported.split(".")[0] in allowed:
                        continue
                    lines = [d["line_number"] for d in graph.get_import_details(importer=module, imported=imported)]
                    bad.append({"importer": module, "imported": imported, "lines": lines})
        return ContractCheck(kept=not bad, metadata={"bad": bad})

    def render_broken_contract(self, check: ContractCheck) -> None:
        """Print each import that is not allowed."""
        for item in check.metadata["bad"]:
            lines = ", ".join(f"l.{n}" for n in item["lines"])
            output.print_error(f"{item['importer']} imports {item['imported']} ({lines})", bold=False)
            output.new_line()
