"""Decoding and encoding of the API's JSON: the runtime of the generated
models (berth._models) and the small readers of the streamed formats
(NDJSON frames, Server-Sent Events) that both clients share.

Times are RFC 3339 as Go writes them (up to nanoseconds, "Z" or an
offset); Python's datetime keeps microseconds, so the last three digits of a
nanosecond time are dropped. Bytes (format "byte") are standard base64.
"""
from __future__ import annotations

import base64
import re
from datetime import datetime, timedelta, timezone
from typing import Any, Dict, Iterator, List, Optional, Tuple

_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})$"
)


def parse_time(s: str) -> datetime:
    """Parses an RFC 3339 time as the daemon writes it."""
    m = _RFC3339.match(s)
    if not m:
        raise ValueError("not an RFC 3339 time: %r" % s)
    y, mo, d, h, mi, sec, frac, tz = m.groups()
    us = int((frac or "0")[:6].ljust(6, "0"))
    if tz in ("Z", "z"):
        tzinfo = timezone.utc
    else:
        sign = 1 if tz[0] == "+" else -1
        tzinfo = timezone(sign * timedelta(hours=int(tz[1:3]), minutes=int(tz[4:6])))
    return datetime(int(y), int(mo), int(d), int(h), int(mi), int(sec), us, tzinfo=tzinfo)


def format_time(t: datetime) -> str:
    """Formats a datetime as RFC 3339 (a naive one is taken as UTC)."""
    if t.tzinfo is None:
        t = t.replace(tzinfo=timezone.utc)
    s = t.isoformat()
    return s[:-6] + "Z" if s.endswith("+00:00") else s


def _decode(codec: Tuple, v: Any) -> Any:
    if v is None or not codec:
        return v
    kind = codec[0]
    if kind == "list":
        return [_decode(codec[1], x) for x in v]
    if kind == "map":
        return {k: _decode(codec[1], x) for k, x in v.items()}
    if kind == "datetime":
        return parse_time(v)
    if kind == "bytes":
        return base64.b64decode(v)
    from ._models import MODELS

    return MODELS[kind].from_dict(v)


def _encode(codec: Tuple, v: Any) -> Any:
    if v is None:
        return None
    if not codec:
        return v
    kind = codec[0]
    if kind == "list":
        return [_encode(codec[1], x) for x in v]
    if kind == "map":
        return {k: _encode(codec[1], x) for k, x in v.items()}
    if kind == "datetime":
        return format_time(v) if isinstance(v, datetime) else v
    if kind == "bytes":
        if isinstance(v, str):
            v = v.encode()
        return base64.b64encode(v).decode("ascii")
    return v.to_dict() if isinstance(v, Model) else v


# STRICT makes from_dict refuse what the spec does not describe: a key it
# does not list, or a required key that is absent. Off for users (a newer
# daemon may add fields); the SDK's suite turns it on, so every answer it
# decodes is checked against api/openapi.json.
STRICT = False


class SpecMismatch(ValueError):
    """An answer the spec does not describe (only raised when STRICT)."""


class Model:
    """Base of the generated models."""

    _wire: Tuple = ()
    _required: Tuple = ()

    @classmethod
    def from_dict(cls, d: Dict[str, Any]):
        """Decodes one JSON object; unknown keys are ignored, missing ones are None."""
        if not isinstance(d, dict):
            raise TypeError("%s: want a JSON object, got %s" % (cls.__name__, type(d).__name__))
        if STRICT:
            known = {key for _, key, _ in cls._wire}
            extra = sorted(k for k in d if k not in known)
            missing = [k for k in cls._required if k not in d]
            if extra or missing:
                raise SpecMismatch("%s: keys not in api/openapi.json %s, required keys absent %s in %r"
                                   % (cls.__name__, extra, missing, d))
        kw = {attr: _decode(codec, d.get(key)) for attr, key, codec in cls._wire}
        return cls(**kw)

    def to_dict(self) -> Dict[str, Any]:
        """Encodes as the API's JSON, leaving out fields that are None."""
        out = {}
        for attr, key, codec in self._wire:
            v = getattr(self, attr)
            if v is not None:
                out[key] = _encode(codec, v)
        return out


def as_body(obj: Any) -> Any:
    """A request body: a Model encoded, a dict passed as is (None values dropped)."""
    if isinstance(obj, Model):
        return obj.to_dict()
    if isinstance(obj, dict):
        return {k: (v.to_dict() if isinstance(v, Model) else v) for k, v in obj.items() if v is not None}
    return obj


class SSEParser:
    """Incremental reader of the text/event-stream format (the WHATWG rules
    the Go client's readSSE follows): feed it lines, it yields complete
    events as (id, event, data, retry_ms). The last id carries over to
    events that name none, as the spec says."""

    def __init__(self) -> None:
        self.last_id = ""
        self._event = ""
        self._data: List[str] = []
        self._has_data = False
        self._retry: Optional[int] = None

    def feed(self, line: str) -> Iterator[Tuple[str, str, str, Optional[int]]]:
        line = line.rstrip("\r\n")
        if line == "":
            if self._has_data or self._retry is not None:
                yield (self.last_id, self._event, "\n".join(self._data), self._retry)
            self._event, self._data, self._has_data, self._retry = "", [], False, None
            return
        if line.startswith(":"):
            return
        field, _, value = line.partition(":")
        if value.startswith(" "):
            value = value[1:]
        if field == "id":
            if "\0" not in value:
                self.last_id = value
        elif field == "event":
            self._event = value
        elif field == "data":
            self._data.append(value)
            self._has_data = True
        elif field == "retry":
            if value.isdigit() and len(value) < 10:
                self._retry = int(value)
