"""The HTTP wire of the control planes, one pydantic model per resource: what `opd serve` answers
(each route's ``response_model``) and what both clients parse, so the shapes are written once.

Bailian's documented shapes are kept exactly: every field is sent, as ``null`` when it has no value,
except those declared absent when they have none (a job's ``code`` unless it failed); an object the
server passes on from another process (a serving process's answer, the engine's rollout records) is
sent with exactly the keys it arrived with. Models a client parses from Bailian keep keys they do not
name (``extra="allow"``). The OpenAPI document generated from them is
committed beside them (``openapi.json``; ``python -m opd_nb.server.openapi_doc --write`` regenerates it).
"""
