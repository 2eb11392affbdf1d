from typing import Any

class FastWrite:
    def write(self, data: Any, **kwargs: Any) -> None: ...

SOURCE_SHA256: str
