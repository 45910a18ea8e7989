"""Tests of the generator: new, update, the wheel's template bundle."""
