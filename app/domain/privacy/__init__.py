"""Data requests: what gpulab holds about a person, given to them (GDPR articles 15 and 20) or erased (article 17).

Contract, by module:
- ``export``: ``export_zip(session=..., user=...)``: everything gpulab holds about ``user``, as a zip of JSON and
  code files (the list is in its docstring), and nothing about anyone else: other people appear as "staff" or
  not at all.
- ``erasure``: ``erase(session=..., person=..., actor=..., code_policy=...)``: an admin removes a person's
  personal data; the account row stays as "erased user" so others' gradebooks, boards, similarity results and
  insights keep their numbers; an audit entry remains.
``privacy`` reads every context's tables and sits on top of the domain; the caller commits.
"""
