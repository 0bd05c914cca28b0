"""``SlotSharingGroup`` and ``MemorySize`` as in ``pyflink.datastream.slot_sharing_group``: accepted
and read back (Spark places tasks; keyspan has no slots), so jobs that declare resource groups still run."""

from __future__ import annotations


class MemorySize:
    def __init__(self, bytes_size: int):
        self._bytes = int(bytes_size)

    @staticmethod
    def of_mebi_bytes(mebi_bytes: int) -> "MemorySize":
        return MemorySize(mebi_bytes << 20)

    def get_bytes(self) -> int:
        return self._bytes

    def get_kibi_bytes(self) -> int:
        return self._bytes >> 10

    def get_mebi_bytes(self) -> int:
        return self._bytes >> 20

    def get_gibi_bytes(self) -> int:
        return self._bytes >> 30

    def get_tebi_bytes(self) -> int:
        return self._bytes >> 40

    def __eq__(self, other):
        return isinstance(other, MemorySize) and other._bytes == self._bytes

    def __hash__(self):
        return hash(self._bytes)

    def __repr__(self):
        return f"MemorySize({self._bytes} bytes)"


class SlotSharingGroup:
    def __init__(self, name: str, cpu_cores: float | None = None, task_heap_memory: MemorySize | None = None,
                 task_off_heap_memory: MemorySize | None = None, managed_memory: MemorySize | None = None,
                 external_resources: dict | None = None):
        self._name = name
        self._cpu_cores = cpu_cores
        self._task_heap_memory = task_heap_memory
        self._task_off_heap_memory = task_off_heap_memory
        self._managed_memory = managed_memory
        self._external_resources = dict(external_resources or {})

    def get_name(self) -> str:
        return self._name

    def get_cpu_cores(self) -> float | None:
        return self._cpu_cores

    def get_task_heap_memory(self) -> MemorySize | None:
        return self._task_heap_memory

    def get_task_off_heap_memory(self) -> MemorySize | None:
        return self._task_off_heap_memory

    def get_managed_memory(self) -> MemorySize | None:
        return self._managed_memory

    def get_external_resources(self) -> dict:
        return dict(self._external_resources)

    @staticmethod
    def builder(name: str) -> "SlotSharingGroup.Builder":
        return SlotSharingGroup.Builder(name)

    class Builder:
        def __init__(self, name: str):
            self._name = name
            self._resources: dict = {}
            self._external: dict = {}

        def _set(self, key, value) -> "SlotSharingGroup.Builder":
            self._resources[key] = value
            return self

        def set_cpu_cores(self, cpu_cores: float):
            return self._set("cpu_cores", cpu_cores)

        def set_task_heap_memory(self, task_heap_memory: MemorySize):
            return self._set("task_heap_memory", task_heap_memory)

        def set_task_heap_memory_mb(self, task_heap_memory_mb: int):
            return self._set("task_heap_memory", MemorySize.of_mebi_bytes(task_heap_memory_mb))

        def set_task_off_heap_memory(self, task_off_heap_memory: MemorySize):
            return self._set("task_off_heap_memory", task_off_heap_memory)

        def set_task_off_heap_memory_mb(self, task_off_heap_memory_mb: int):
            return self._set("task_off_heap_memory", MemorySize.of_mebi_bytes(task_off_heap_memory_mb))

        def set_managed_memory(self, managed_memory: MemorySize):
            return self._set("managed_memory", managed_memory)

        def set_managed_memory_mb(self, managed_memory_mb: int):
            return self._set("managed_memory", MemorySize.of_mebi_bytes(managed_memory_mb))

        def set_external_resource(self, name: str, value: float):
            self._external[name] = value
            return self

        def build(self) -> "SlotSharingGroup":
            return SlotSharingGroup(self._name, external_resources=self._external, **self._resources)
