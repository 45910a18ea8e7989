"""Tests of generation: new, update, the hooks, the wheel's template bundle."""
