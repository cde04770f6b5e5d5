// The waterfall of each run (GET /api/sessions/{sid}/waterfall, built by loopwire/ui/waterfall.py):
// generations and tool calls as bars on the run's time axis, loop detections, fallbacks and
// compactions as marks, and a table of each turn's duration, tokens and cost. Plain SVG.
import { api, cost, el } from "./common.js";

const SVG = "http://www.w3.org/2000/svg";
const LABEL_W = 170;
const PLOT_W = 820;
const ROW_H = 20;
const AXIS_H = 22;

function svg(tag, attrs = {}, ...children) {
  const node = document.createElementNS(SVG, tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children) node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  return node;
}

export const ms = (value) => (value === null || value === undefined ? "—"
  : value >= 1000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`);

// A step of about a tenth of the run for the axis' ticks (1, 2 or 5 times a power of ten).
function tickStep(total) {
  const rough = Math.max(total, 1) / 8;
  const power = 10 ** Math.floor(Math.log10(rough));
  return [1, 2, 5, 10].map((f) => f * power).find((step) => step >= rough);
}

function rows(run) {
  const out = run.turns.map((t) => ({ kind: "generation", label: `turn ${t.turn} · ${t.model ?? "model"}`, span: t,
    title: `turn ${t.turn} generation: ${ms(t.duration_ms)}, ${t.input_tokens} in / ${t.output_tokens} out, ${cost(t.cost_usd)}` }));
  for (const call of run.tools) {
    out.push({ kind: "tool", label: `turn ${call.turn} · ${call.name}`, span: call,
      title: `${call.name}: ${call.end_ms === null ? "running" : ms(call.duration_ms)}${call.is_error ? " (error)" : ""}${call.recorded ? " (recorded)" : ""}` });
  }
  return out.sort((a, b) => a.span.start_ms - b.span.start_ms || (a.kind === "generation" ? -1 : 1));
}

function chart(run) {
  const total = Math.max(run.duration_ms || 0, 10); // a run just started still gets a readable axis
  const x = (at) => LABEL_W + (PLOT_W * Math.max(0, Math.min(at, total))) / total;
  const lines = rows(run);
  const height = AXIS_H + ROW_H * Math.max(lines.length, 1) + 6;
  const root = svg("svg", { class: "waterfall-chart", width: LABEL_W + PLOT_W + 10, height, role: "img",
    "aria-label": `waterfall of run ${run.run_id}` });
  const step = tickStep(total);
  for (let at = 0; at <= total; at += step) {
    root.append(svg("line", { x1: x(at), x2: x(at), y1: AXIS_H - 4, y2: height, class: "tick" }),
      svg("text", { x: x(at), y: 12, class: "tick-label", "text-anchor": "middle" }, ms(at)));
  }
  lines.forEach((line, n) => {
    const y = AXIS_H + n * ROW_H;
    const end = line.span.end_ms ?? total; // a call without its result yet runs to the latest event
    const bar = svg("rect", { x: x(line.span.start_ms), y: y + 3, height: ROW_H - 6, rx: 2,
      width: Math.max(2, x(end) - x(line.span.start_ms)),
      class: `bar ${line.kind}${line.span.is_error ? " error" : ""}${line.span.recorded ? " recorded" : ""}${line.span.end_ms === null ? " open" : ""}`,
      "data-turn": line.span.turn, "data-name": line.span.name ?? null }, svg("title", {}, line.title));
    // the duration after the bar, else before it, else (a bar across the whole axis) inside it
    const place = x(end) + 56 <= LABEL_W + PLOT_W ? "after" : x(line.span.start_ms) - 56 >= LABEL_W ? "before" : "inside";
    const at = { after: x(end) + 4, before: x(line.span.start_ms) - 4, inside: x(line.span.start_ms) + 4 }[place];
    const label = line.label.length > 28 ? `${line.label.slice(0, 27)}…` : line.label;
    if (line.kind === "generation" && line.span.wait_ms) { // the wait for the model limits, before the bar
      const from = line.span.start_ms - line.span.wait_ms;
      root.append(svg("rect", { x: x(from), y: y + 6, height: ROW_H - 12, rx: 2, width: Math.max(2, x(line.span.start_ms) - x(from)),
        class: "bar wait", "data-turn": line.span.turn }, svg("title", {}, `waited ${ms(line.span.wait_ms)} for the model limits`)));
    }
    root.append(svg("text", { x: 4, y: y + ROW_H - 6, class: `row-label ${line.kind}` }, label, svg("title", {}, line.label)), bar,
      svg("text", { x: at, y: y + ROW_H - 6, class: `bar-label ${place}`, "text-anchor": place === "before" ? "end" : "start" },
        ms(line.span.duration_ms)));
  });
  for (const mark of run.marks) {
    root.append(svg("g", { class: `mark ${mark.kind}`, "data-kind": mark.kind },
      svg("line", { x1: x(mark.at_ms), x2: x(mark.at_ms), y1: AXIS_H - 6, y2: height }),
      svg("path", { d: `M ${x(mark.at_ms) - 5} ${AXIS_H - 10} h 10 l -5 7 z` }),
      svg("title", {}, `#${mark.seq} ${mark.label} at ${ms(mark.at_ms)}`)));
  }
  return root;
}

function turnTable(run) {
  if (!run.turns.length) return null;
  return el("table", { class: "turns" },
    el("thead", {}, el("tr", {}, ["turn", "model", "generation", "tool time", "tokens", "cache", "cost"].map((h) => el("th", {}, h)))),
    el("tbody", {}, run.turns.map((t) => {
      const toolTime = run.tools.filter((c) => c.turn === t.turn && c.duration_ms !== null)
        .reduce((sum, c) => sum + c.duration_ms, 0);
      return el("tr", { "data-turn": t.turn }, el("td", {}, t.turn), el("td", {}, t.model ?? ""),
        el("td", {}, ms(t.duration_ms) + (t.wait_ms ? ` (waited ${ms(t.wait_ms)})` : t.throttled ? " (waited)" : "")),
        el("td", {}, toolTime ? ms(toolTime) : "—"),
        el("td", {}, `${t.input_tokens} in / ${t.output_tokens} out`),
        el("td", { class: "cache" }, t.cache_read_input_tokens || t.cache_creation_input_tokens
          ? `${t.cache_read_input_tokens} read / ${t.cache_creation_input_tokens} written` : "—"),
        el("td", {}, cost(t.cost_usd)));
    })));
}

function runBlock(run, n) {
  const marks = run.marks.map((m) => el("li", { class: `mark-note ${m.kind}` }, `${ms(m.at_ms)}: ${m.label}`));
  return el("div", { class: "run-waterfall", "data-run": run.run_id },
    el("div", { class: "run-head" }, el("b", {}, `run ${n + 1}`), ` ${run.run_id} · `,
      el("span", { class: `status ${run.status ?? "running"}` }, run.status ?? "running"),
      ` · ${ms(run.duration_ms)} · ${run.turns.length} generation(s), ${run.tools.length} tool call(s)`),
    chart(run), marks.length ? el("ul", { class: "marks" }, marks) : null, turnTable(run));
}

export async function refreshWaterfall(sid) {
  const box = document.querySelector("#waterfall");
  try {
    const { runs } = await api(`/api/sessions/${encodeURIComponent(sid)}/waterfall`);
    box.replaceChildren(...(runs.length ? runs.map(runBlock) : [el("span", { class: "muted" }, "no run yet")]));
  } catch (err) {
    box.replaceChildren(el("span", { class: "error-text" }, String(err.message)));
  }
}
