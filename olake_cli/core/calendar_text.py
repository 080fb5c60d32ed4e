"""Dates and timestamps over PostgreSQL's whole range, in integer arithmetic (no Python datetime).

PostgreSQL counts days in the proleptic Gregorian calendar from 4713 BC to 5874897 AD and prints a
year before 1 AD as ``YYYY-MM-DD BC`` (there is no year 0), a year beyond 9999 with more digits.
The wire texts here follow it: ``0044-03-15 BC``, ``10000-01-01``, ``0044-03-15T12:00:00.000000 BC``,
``0044-03-15T12:00:00.000000+00:00 BC``. Day numbers are days since 1970-01-01 (Arrow's date32) and
instants microseconds since 1970-01-01 (Arrow's timestamp[us]), as unbounded Python integers.
"""

from __future__ import annotations

import re

DAY_US = 86_400_000_000
_DATE_RE = re.compile(r"(\d{4,7})-(\d\d)-(\d\d)( BC)?")
_TIMESTAMP_RE = re.compile(
    r"(\d{4,7})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:\.(\d{1,6}))?"
    r"(?:([+-])(\d\d)(?::?(\d\d))?(?::?(\d\d))?)?( BC)?")


def civil_from_days(days: int) -> tuple[int, int, int]:
    """(astronomical year, month, day) of a day number (H. Hinnant's algorithm)."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def days_from_civil(year: int, month: int, day: int) -> int:
    """The day number of an astronomical (year, month, day); ValueError if no such day."""
    if not (1 <= month <= 12 and 1 <= day <= 31):
        raise ValueError(f"no such date: {year}-{month}-{day}")
    y = year - (month <= 2)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    days = era * 146_097 + yoe * 365 + yoe // 4 - yoe // 100 + doy - 719_468
    if civil_from_days(days) != (year, month, day):
        raise ValueError(f"no such date: {year}-{month:02d}-{day:02d}")
    return days


def _era_year(year: int) -> tuple[int, str]:
    return (year, "") if year > 0 else (1 - year, " BC")


def date_text(days: int) -> str:
    """PostgreSQL's ISO text of a day number: ``YYYY-MM-DD``, ``YYYYY-MM-DD`` or ``YYYY-MM-DD BC``."""
    year, month, day = civil_from_days(days)
    shown, era = _era_year(year)
    return f"{shown:04d}-{month:02d}-{day:02d}{era}"


def timestamp_text(micros: int, with_zone: bool) -> str:
    """The wire text of an instant: ``YYYY-MM-DDTHH:MM:SS.ffffff[+00:00][ BC]``."""
    days, in_day = divmod(micros, DAY_US)
    seconds, fraction = divmod(in_day, 1_000_000)
    minutes, second = divmod(seconds, 60)
    hour, minute = divmod(minutes, 60)
    year, month, day = civil_from_days(days)
    shown, era = _era_year(year)
    zone = "+00:00" if with_zone else ""
    return f"{shown:04d}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}{zone}{era}"


def _astronomical(year_text: str, bc: str | None) -> int:
    year = int(year_text)
    if year == 0:
        raise ValueError("there is no year 0 (1 BC precedes 1 AD)")
    return 1 - year if bc else year


def parse_date(text: str) -> int:
    """The day number of ``YYYY-MM-DD[ BC]`` (any number of year digits from 4); ValueError if bad."""
    match = _DATE_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a date: {text[:40]!r}")
    year, month, day, bc = match.groups()
    return days_from_civil(_astronomical(year, bc), int(month), int(day))


def parse_timestamp(text: str) -> tuple[int, bool]:
    """(microseconds since 1970 UTC, whether an offset was given) of a wire or PostgreSQL timestamp.

    Accepts ``T`` or a space, 0-6 fraction digits, an optional ``+HH[:MM[:SS]]`` offset and `` BC``.
    """
    match = _TIMESTAMP_RE.fullmatch(text)
    if match is None:
        raise ValueError(f"not a timestamp: {text[:40]!r}")
    year, month, day, hour, minute, second, fraction, sign, oh, om, os_, bc = match.groups()
    if int(hour) > 23 or int(minute) > 59 or int(second) > 59:
        raise ValueError(f"not a time of day: {text[:40]!r}")
    days = days_from_civil(_astronomical(year, bc), int(month), int(day))
    seconds = (int(hour) * 60 + int(minute)) * 60 + int(second)
    micros = days * DAY_US + seconds * 1_000_000 + int((fraction or "").ljust(6, "0"))
    if sign is not None:
        offset = (int(oh) * 3600 + int(om or 0) * 60 + int(os_ or 0)) * 1_000_000
        micros -= offset if sign == "+" else -offset
    return micros, sign is not None
