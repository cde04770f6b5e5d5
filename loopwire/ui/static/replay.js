// "Replay…": POST /api/sessions/{sid}/replay runs the replay driver (loopwire/replay/) on a fork
// of this session and answers its report; each run's comparison is shown side by side, as
// `loopwire replay` prints it (status, final text and its diff, tool calls, turns, tokens, cost).
import { api, cost, el } from "./common.js";
import { sessionLink } from "./lineage.js";

const callText = (c) => `${c.name}(${JSON.stringify(c.input ?? {})})`;

const CELLS = {
  status: (s) => s.status,
  "final text": (s) => s.final_text || "",
  "tool calls": (s) => (s.tool_calls.length ? s.tool_calls.map(callText).join("\n") : "none"),
  turns: (s) => String(s.turns ?? ""),
  tokens: (s) => `${s.input_tokens ?? 0} in / ${s.output_tokens ?? 0} out`,
  cost: (s) => cost(s.cost_usd),
  models: (s) => (s.models || []).join(", ") || "—",
};

function diffLines(lines) {
  return el("pre", { class: "diff" }, lines.map((line) => el("span", {
    class: line.startsWith("+") && !line.startsWith("+++") ? "add" : line.startsWith("-") && !line.startsWith("---") ? "del" : "",
  }, `${line}\n`)));
}

function runTable(run) {
  const flagged = { status: run.status_differs, "final text": run.text_differs, "tool calls": run.tool_calls_differ };
  const body = Object.entries(CELLS).map(([what, cell]) => {
    const recorded = run.source ? cell(run.source) : "—";
    const replayed = run.replay ? cell(run.replay) : "—";
    const differs = what in flagged ? flagged[what] : recorded !== replayed;
    return el("tr", { class: differs ? "differs" : "", "data-row": what }, el("th", {}, what),
      el("td", { class: "recorded" }, recorded), el("td", { class: "replayed" }, replayed), el("td", {}, differs ? "≠" : ""));
  });
  return el("div", { class: "run-comparison", "data-run": run.run },
    el("table", { class: "comparison" },
      el("caption", {}, `run ${run.run}`),
      el("thead", {}, el("tr", {}, el("th", {}, ""), el("th", {}, "recorded"), el("th", {}, "replay"), el("th", {}, ""))),
      el("tbody", {}, body)),
    run.text_diff.length ? diffLines(run.text_diff) : null);
}

function showReport(report) {
  const verdict = report.differs ? "the replay differs: a run's status changed" : "same statuses in every run";
  document.querySelector("#comparison").replaceChildren(
    el("p", {}, "replay ", sessionLink(report.replay_session), ` of ${report.source_session} · tools ${report.tools}`,
      report.model ? ` · model ${report.model}` : "", report.system_changed ? " · new system prompt" : ""),
    ...report.runs.map(runTable),
    ...report.not_sent.map((s) => el("p", { class: "muted" },
      `not sent: ${s.verb} of run ${s.run} after ${s.after_turns} turns (the replay's run ended before)`)),
    el("p", { class: `verdict ${report.differs ? "differs" : "same"}` }, verdict));
}

export function setupReplay(sid) {
  const form = document.querySelector("#replay");
  const status = document.querySelector("#replay-status");
  form.addEventListener("submit", async (submit) => {
    submit.preventDefault();
    const data = new FormData(form);
    const body = { tools: data.get("tools") };
    if (String(data.get("model") || "").trim()) body.model = String(data.get("model")).trim();
    if (String(data.get("system") || "").trim()) body.system = String(data.get("system"));
    const button = form.querySelector("button[type=submit]");
    button.disabled = true;
    status.className = "muted";
    status.textContent = "replaying… (each run of the session, on a fork)";
    try {
      showReport(await api(`/api/sessions/${encodeURIComponent(sid)}/replay`, { body }));
      status.textContent = "";
    } catch (err) {
      status.className = "error-text";
      status.textContent = String(err.message);
    } finally {
      button.disabled = false;
    }
  });
}
