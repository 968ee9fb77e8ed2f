"""How results show, shared by every front end: static HTML for notebooks, tables and safe text for terminals."""
