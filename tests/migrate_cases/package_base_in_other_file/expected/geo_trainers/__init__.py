"""Trainers whose steps live in subclasses of a base task defined in another file of the package."""

from .base import BaseTask
from .classification import ClassificationTask
from .regression import RegressionTask

__all__ = ("BaseTask", "ClassificationTask", "RegressionTask")
