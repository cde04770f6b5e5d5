"""The fake OpenAI API (Responses and Chat Completions) the executor tests run codex and
opencode against; it ships in the package as `loopwire.testing.fake_openai` (also
`python -m tests.fakes.openai_server`)."""

from loopwire.testing.fake_openai import (
    Failure,
    FakeOpenAI,
    RecordedRequest,
    last_user_text,
    load_script,
    main,
    openai_server,
    tool_names,
    tool_outputs,
)

__all__ = ["FakeOpenAI", "Failure", "RecordedRequest", "last_user_text", "load_script", "main", "openai_server",
           "tool_names", "tool_outputs"]

if __name__ == "__main__":
    main()
