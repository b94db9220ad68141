"""Test support shared by the suite and by users: multi-host network namespaces, helpers."""
