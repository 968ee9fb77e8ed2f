"""One ``APIRouter`` per resource of Bailian's fine-tune API (plus the local-only ones)."""
