"""Build-time helpers of setup.py and scripts/build_wheels.py (shipped in the sdist, not in wheels)."""
