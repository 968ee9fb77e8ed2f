"""The paid boundary: the gate before a start (`gate`), the consent rule (`consent`), a job's size and bill (`estimate`).

Kept empty so that `opd_nb.paid.consent`, a leaf the client holds, loads nothing else.
"""
