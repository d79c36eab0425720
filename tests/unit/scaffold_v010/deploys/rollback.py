"""Return every host to its previous release (or to `rollback_to`), through the readiness gate; no download."""

from specfleet.steps import rollback

rollback()
