"""Spans from a job's function servers: their credentials and environment, the OTLP intake that stores them, the forwarder."""
