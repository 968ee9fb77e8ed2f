"""The SDK's own traces of every rollout, as opd-nb reads them (core: the server, the client, the CLI and
the notebook share these models).

* :mod:`~opd_nb.traces.ids`: the ids tying a span to its rollout record (kind, step, group, sample);
* :mod:`~opd_nb.traces.spans`: a span, and a traced call's span tree (:class:`Trajectory`);
* :mod:`~opd_nb.traces.facts`: what to show of a span (key attributes, messages, arguments, results);
* :mod:`~opd_nb.traces.summary`: a step's numbers (tool latency and errors, LLM calls per trajectory);
* :mod:`~opd_nb.traces.page`: one answer of ``GET /fine-tunes/{id}/traces`` and its printed tree.
"""
