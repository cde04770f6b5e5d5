// One session: its live timeline (server-sent events from the LOOPWIRE_EVENTS stream,
// each event once, in seq order), the budget, approvals and the message / steer / abort forms;
// lineage and "Fork here" (lineage.js), the waterfall (waterfall.js), replays (replay.js).
import { api, cost, el, textOf } from "./common.js";
import { forkButton, showLineage } from "./lineage.js";
import { setupReplay } from "./replay.js";
import { refreshWaterfall } from "./waterfall.js";

const sid = decodeURIComponent(window.location.pathname.split("/").pop());
const timeline = document.querySelector("#timeline");
const streaming = new Map(); // "<run_id>:<turn>" -> the assistant text node being streamed
const run = { limits: {}, tokens: 0, cost: 0, costKnown: true, turns: 0 };
document.querySelector("#sid").textContent = sid;

function add(kind, ...children) {
  const node = el("div", { class: `ev ${kind}` }, ...children);
  timeline.append(node);
  node.scrollIntoView({ block: "nearest" });
  return node;
}

const meta = (event) => el("div", { class: "meta" }, `#${event.seq} ${event.kind} · ${new Date(event.ts).toLocaleTimeString()} `,
  forkButton(sid, event));

function setBar(id, used, max) {
  const bar = document.querySelector(id);
  const pct = max ? Math.min(100, (100 * used) / max) : 0;
  bar.firstElementChild.style.width = `${pct}%`;
  bar.classList.toggle("high", pct >= 80);
}

function showBudget() {
  const { max_total_tokens: maxTokens, max_cost_usd: maxCost, max_turns: maxTurns } = run.limits;
  document.querySelector("#turns").textContent = run.turns;
  document.querySelector("#turns-max").textContent = maxTurns ? ` / ${maxTurns}` : "";
  setBar("#token-bar", run.tokens, maxTokens);
  document.querySelector("#token-text").textContent = `${run.tokens}${maxTokens ? ` / ${maxTokens}` : " (no limit)"}`;
  setBar("#cost-bar", run.cost, maxCost);
  document.querySelector("#cost-text").textContent =
    `${run.costKnown ? cost(run.cost) : "unknown"}${maxCost ? ` / $${maxCost}` : " (no limit)"}`;
}

async function refreshStatus() {
  try {
    const s = await api(`/api/sessions/${encodeURIComponent(sid)}`);
    const status = document.querySelector("#status");
    status.textContent = s.status;
    status.className = `status ${s.status}`;
    // Where the run stands (session.get's phase and activity): a page opened mid-run knows it at once.
    document.querySelector("#position").textContent = [s.phase, s.activity].filter(Boolean).join(" · ");
    document.querySelector("#profile-name").textContent = s.profile ?? "";
    showLineage(s);
    // The session's cost so far (null: a model without a known price); events carry it only at run.ended.
    run.costKnown = s.cost_usd !== null && s.cost_usd !== undefined;
    run.cost = s.cost_usd ?? 0;
    showBudget();
  } catch (err) {
    document.querySelector("#action-error").textContent = String(err.message);
  }
}

async function send(verb, body) {
  try {
    await api(`/api/sessions/${encodeURIComponent(sid)}/${verb}`, { body });
    document.querySelector("#action-error").textContent = "";
  } catch (err) {
    document.querySelector("#action-error").textContent = String(err.message);
  }
}

function closeApprovals(note) {
  for (const box of timeline.querySelectorAll(".ev.approval .buttons")) {
    if (!box.dataset.answered) {
      box.dataset.answered = "1";
      box.replaceChildren(el("span", { class: "muted" }, note));
    }
  }
}

function approval(event) {
  const buttons = el("div", { class: "buttons" });
  const decide = (decision) => async () => {
    buttons.dataset.answered = "1";
    buttons.replaceChildren(el("span", { class: "muted" }, `${decision === "approve" ? "approved" : "denied"}…`));
    await send("decision", { checkpoint_id: event.checkpoint_id, decision });
  };
  buttons.append(el("button", { class: "approve", onclick: decide("approve") }, "Approve"), " ",
                 el("button", { class: "deny", onclick: decide("deny") }, "Deny"));
  const calls = (event.tool_calls || []).map((c) => el("div", { class: "text" }, `${c.name} ${JSON.stringify(c.input)}`));
  const proposal = event.proposal !== null && event.proposal !== undefined
    ? el("div", { class: "text" }, `proposes: ${typeof event.proposal === "string" ? event.proposal : JSON.stringify(event.proposal)}`)
    : null;
  add("approval", meta(event), el("b", {}, "approval requested"), calls, proposal, buttons);
}

function render(event) {
  const key = `${event.run_id}:${event.turn}`;
  switch (event.kind) {
    case "run.queued":
      add("notice", meta(event), `run ${event.run_id} queued: place ${event.position} in its tenant's queue`);
      break;
    case "run.started":
      closeApprovals("");
      Object.assign(run, { limits: (event.config && event.config.limits) || {}, tokens: 0, cost: 0, costKnown: true, turns: 0 });
      add("notice", meta(event), `run ${event.run_id} started (profile ${event.profile})`);
      break;
    case "user.message":
      add("user", meta(event), el("div", { class: "text" }, `${event.source} ▸ ${textOf(event.message.content)}`));
      break;
    case "text.delta": {
      let node = streaming.get(key);
      if (!node) {
        node = el("span", { class: "text" });
        streaming.set(key, node);
        add("assistant", meta(event), node);
      }
      node.textContent += event.text;
      break;
    }
    case "message": {
      const text = textOf(event.message.content);
      const node = streaming.get(key);
      if (node && node !== true) {
        node.textContent = text;
        node.parentElement.querySelector(".meta").replaceWith(meta(event)); // the message's seq, to fork at
      } else if (!node && text) add("assistant", meta(event), el("div", { class: "text" }, text));
      streaming.set(key, node || true);
      run.turns = event.turn;
      run.tokens += (event.usage?.input_tokens ?? 0) + (event.usage?.output_tokens ?? 0);
      break;
    }
    case "retracted": {
      const node = streaming.get(key);
      if (node && node !== true) node.classList.add("retracted");
      streaming.delete(key);
      add("notice", meta(event), `turn ${event.turn} retracted: ${event.reason}`);
      break;
    }
    case "tool.call":
      add("tool", meta(event), `→ ${event.name} ${JSON.stringify(event.input)}`);
      break;
    case "tool.result": {
      const content = typeof event.content === "string" ? event.content : JSON.stringify(event.content);
      add(event.is_error ? "error" : "tool", meta(event), `← ${event.name}: ${content.slice(0, 2000)}`);
      closeApprovals("answered");
      break;
    }
    case "approval.requested":
      closeApprovals("answered");
      approval(event);
      break;
    case "approval.decided":
      closeApprovals(event.decision === "approve" ? "approved" : "denied");
      break;
    case "steering":
      add("notice", meta(event), `steering: ${event.source}${event.reason ? ` (${event.reason})` : ""}`);
      break;
    case "phase.changed":
      closeApprovals("answered");
      add("notice", meta(event), `phase ${event.from} → ${event.to}`);
      break;
    case "loop.detected":
      add("warning", meta(event), `loop detected: ${event.detection} → ${event.escalation}`);
      break;
    case "model.fallback":
      add("notice", meta(event), `model ${event.from_model} → ${event.to_model} (${event.reason})`);
      break;
    case "compaction":
      add("notice", meta(event), `context compacted ${event.tokens_before} → ${event.tokens_after} tokens`);
      break;
    case "budget.warning":
      add("warning", meta(event), `budget: ${event.limit} at ${Math.round(event.pct * 100)}%`);
      break;
    case "warning":
      add("warning", meta(event), `warning ${event.code}: ${event.message}`);
      break;
    case "error":
      add("error", meta(event), `error ${event.code}: ${event.message}`);
      break;
    case "run.ended":
      closeApprovals("");
      run.turns = event.turns;
      run.tokens = (event.usage?.input_tokens ?? 0) + (event.usage?.output_tokens ?? 0);
      run.costKnown = event.cost_usd !== null && event.cost_usd !== undefined;
      run.cost = event.cost_usd ?? 0;
      add("ended", meta(event), `■ ${event.status}${event.reason ? ` (${event.reason})` : ""}: ${event.final_text}`)
        .setAttribute("data-status", event.status);
      break;
    default:
      if (event.kind !== "generating" && event.kind !== "tools.progress") add("notice", meta(event), event.kind);
  }
  showBudget();
}

const source = new EventSource(`/api/sessions/${encodeURIComponent(sid)}/events`);
// The waterfall is redrawn from the transcript when a span or a mark may have changed.
const WATERFALL_KINDS = new Set(["run.started", "message", "tool.call", "tool.result", "loop.detected",
  "model.fallback", "compaction", "run.ended"]);
let waterfallDue = null;
source.onmessage = (message) => {
  const event = JSON.parse(message.data);
  render(event);
  refreshStatus();
  if (WATERFALL_KINDS.has(event.kind) && !waterfallDue) {
    waterfallDue = setTimeout(() => { waterfallDue = null; refreshWaterfall(sid); }, 300);
  }
};

for (const [id, verb, field] of [["#message", "message", "content"], ["#steer", "steer", "content"], ["#abort", "abort", "reason"]]) {
  document.querySelector(id).addEventListener("submit", async (event) => {
    event.preventDefault();
    const value = new FormData(event.target).get(field) || (verb === "abort" ? "aborted from the inspector" : "");
    await send(verb, { [field]: value });
    event.target.reset();
  });
}

// Delete: asks first, then the receipt (each store and what it removed).
document.querySelector("#export").href = `/api/sessions/${encodeURIComponent(sid)}/export`;
document.querySelector("#delete").addEventListener("submit", async (event) => {
  event.preventDefault();
  const status = document.querySelector("#delete-status");
  if (!window.confirm(`Delete session ${sid} from every store? Its state, history, memory and events are removed for good.`)) {
    return;
  }
  status.textContent = "deleting…";
  try {
    const receipt = await api(`/api/sessions/${encodeURIComponent(sid)}/delete`, { body: { confirm: sid } });
    status.textContent = receipt.deleted ? "deleted" : "nothing to delete";
    const rows = receipt.stores.map((s) => el("tr", {}, el("td", {}, s.store), el("td", {}, String(s.removed))));
    const box = document.querySelector("#receipt");
    box.replaceChildren(el("table", { class: "receipt" }, el("tr", {}, el("th", {}, "store"), el("th", {}, "removed")), ...rows));
  } catch (err) {
    status.textContent = String(err.message);
  }
});

setupReplay(sid);
refreshStatus();
refreshWaterfall(sid);
setInterval(refreshStatus, 5000);
showBudget();
