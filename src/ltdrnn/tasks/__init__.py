"""Benchmark tasks: generated (adding, copy, toy, ...) and real data (MNIST, CIFAR, UCR/UEA, ...)."""

from .base import SPLITS, Batch, Task, TaskInfo, build_task, list_tasks, register_task

__all__ = ["SPLITS", "Batch", "Task", "TaskInfo", "build_task", "list_tasks", "register_task"]
