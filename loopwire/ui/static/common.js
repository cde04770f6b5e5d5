// Shared helpers of the inspector's pages (plain ES modules, no build step).
export async function api(path, options = {}) {
  const init = { ...options };
  if (init.body !== undefined) {
    init.method = init.method || "POST";
    init.headers = { "Content-Type": "application/json" };
    init.body = JSON.stringify(init.body);
  }
  const response = await fetch(path, init);
  const data = await response.json().catch(() => ({}));
  if (!response.ok) {
    const err = data.error || { code: response.status, message: response.statusText };
    throw new Error(`${err.code}: ${err.message}`);
  }
  return data;
}

export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [key, value] of Object.entries(attrs)) {
    if (key === "class") node.className = value;
    else if (key.startsWith("on")) node.addEventListener(key.slice(2), value);
    else if (value !== undefined && value !== null) node.setAttribute(key, value);
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined) continue;
    node.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

export function tokens(usage) {
  if (!usage) return "";
  return `${usage.input_tokens ?? 0} in / ${usage.output_tokens ?? 0} out`;
}

export function cost(value) {
  return value === null || value === undefined ? "unknown" : `$${Number(value).toFixed(6)}`;
}

export function textOf(content) {
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return "";
  return content.filter((b) => b && b.type === "text").map((b) => b.text).join("");
}
