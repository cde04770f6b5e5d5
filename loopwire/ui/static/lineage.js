// A session's lineage (session.get's forked_from and forks) and "Fork here" on an event of
// the timeline: POST /api/sessions/{sid}/fork (loopwire.api.session.fork), then the fork's page.
import { api, el } from "./common.js";

const EPHEMERAL = new Set(["text.delta", "generating", "tools.progress"]); // not kept: no seq to fork at

export const sessionLink = (id) => el("a", { href: `/session/${encodeURIComponent(id)}`, class: "sid" }, id);

export function showLineage(state) {
  const box = document.querySelector("#lineage");
  const parts = [];
  if (state.forked_from) {
    parts.push(el("span", { class: "forked-from" }, "forked from ", sessionLink(state.forked_from.session_id),
      ` at seq ${state.forked_from.seq}`));
  }
  const forks = state.forks || [];
  if (forks.length) {
    parts.push(el("span", { class: "forks" }, "forks: ",
      forks.flatMap((id, n) => (n ? [", ", sessionLink(id)] : [sessionLink(id)]))));
  }
  box.replaceChildren(...parts);
}

// `<sid>-fork-<8 hex>`, in the source's tenant namespace when its id has one (`<tenant>.<sid>`).
function suggestedId(sid) {
  const [tenant, own] = sid.includes(".") ? sid.split(".", 2) : [null, sid];
  const id = `${own.slice(0, 100)}-fork-${Math.random().toString(16).slice(2, 10)}`;
  return tenant ? `${tenant}.${id}` : id;
}

// An inline form under the event: the new id (prefilled), Fork, and the refusal if any.
function openForkForm(sid, event, holder) {
  if (holder.querySelector("form.fork")) return;
  const input = el("input", { type: "text", name: "new_session_id", value: suggestedId(sid), required: "" });
  const problem = el("span", { class: "fork-error error-text" });
  const form = el("form", { class: "fork" }, `fork at #${event.seq} as `, input,
    el("button", { type: "submit", class: "primary" }, "Fork"),
    el("button", { type: "button", onclick: () => form.remove() }, "Cancel"), problem);
  form.addEventListener("submit", async (submit) => {
    submit.preventDefault();
    problem.textContent = "";
    try {
      const reply = await api(`/api/sessions/${encodeURIComponent(sid)}/fork`,
        { body: { new_session_id: input.value.trim(), at_seq: event.seq } });
      window.location.href = `/session/${encodeURIComponent(reply.session_id)}`;
    } catch (err) {
      problem.textContent = String(err.message);
    }
  });
  holder.append(form);
  input.focus();
  input.select();
}

// The "Fork here" button of an event's line (none for events that are not kept).
export function forkButton(sid, event) {
  if (EPHEMERAL.has(event.kind) || !event.seq) return null;
  return el("button", { class: "fork-here", type: "button", title: `a new session with the history as it stood at #${event.seq}`,
    onclick: (click) => openForkForm(sid, event, click.target.closest(".ev")) }, "Fork here");
}
