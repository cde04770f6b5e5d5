// The sessions list (loopwire.api.sessions.list), refreshed every few seconds, and the start form.
import { api, cost, el, tokens } from "./common.js";

const PROFILES = ["agentic", "agentic_planned", "turn_by_turn", "conversational", "claude_code", "opencode", "codex", "acp"];
const body = document.querySelector("#sessions tbody");
const filter = document.querySelector("#status-filter");

async function refresh() {
  const status = filter.value;
  try {
    const page = await api(`/api/sessions${status ? `?status=${encodeURIComponent(status)}` : ""}`);
    document.querySelector("#list-error").textContent = "";
    body.replaceChildren(...page.sessions.map((s) => el("tr", { "data-session": s.session_id },
      el("td", { class: "sid" }, el("a", { href: `/session/${encodeURIComponent(s.session_id)}` }, s.session_id)),
      el("td", {}, el("span", { class: `status ${s.status}` }, s.status)),
      el("td", { class: "where" }, [s.phase, s.activity].filter(Boolean).join(" · ")),
      el("td", {}, s.profile ?? ""),
      el("td", {}, s.turns),
      el("td", {}, tokens(s.usage)),
      el("td", {}, "cost_usd" in s ? cost(s.cost_usd) : ""),
      el("td", { class: "muted" }, s.updated_at ? new Date(s.updated_at).toLocaleString() : ""))));
    if (!page.sessions.length) body.replaceChildren(el("tr", {}, el("td", { colspan: 8, class: "muted" }, "no sessions")));
  } catch (err) {
    document.querySelector("#list-error").textContent = String(err.message);
  }
}

const profile = document.querySelector("#profile");
profile.replaceChildren(...PROFILES.map((p) => el("option", { value: p }, p)));

document.querySelector("#start").addEventListener("submit", async (event) => {
  event.preventDefault();
  const form = new FormData(event.target);
  const start = { input: form.get("input"), profile: form.get("profile") };
  const tools = String(form.get("tools") || "").split(",").map((t) => t.trim()).filter(Boolean);
  if (tools.length) start.tools = tools;
  if (form.get("model")) start.model = { primary: form.get("model") };
  try {
    const { session_id } = await api("/api/start", { body: start });
    window.location.href = `/session/${encodeURIComponent(session_id)}`;
  } catch (err) {
    document.querySelector("#start-error").textContent = String(err.message);
  }
});

filter.addEventListener("change", refresh);
refresh();
setInterval(refresh, 3000);
