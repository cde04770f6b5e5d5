"""The fake Messages API the suite runs against; it ships in the package for users' own
tests as `loopwire.testing.fake_anthropic` (also `python -m tests.fakes.anthropic_server`)."""

from loopwire.testing.fake_anthropic import (
    Failure,
    FakeAnthropic,
    RecordedRequest,
    anthropic_server,
    count_tokens,
    load_script,
    main,
)

__all__ = ["FakeAnthropic", "Failure", "RecordedRequest", "anthropic_server", "count_tokens", "load_script", "main"]

if __name__ == "__main__":
    main()
