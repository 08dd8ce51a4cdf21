// A few DOM helpers: elements from tags, attributes and children.

type Child = Node | string | null | undefined | false;

export function h(tag: string, attrs: Record<string, any> = {}, ...children: (Child | Child[])[]): HTMLElement {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on') && typeof v === 'function') el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'style' && typeof v === 'object') Object.assign(el.style, v);
    else el.setAttribute(k, String(v));
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    el.append(typeof c === 'string' ? document.createTextNode(c) : c);
  }
  return el;
}

export function svg(tag: string, attrs: Record<string, any> = {}, ...children: Node[]): SVGElement {
  const el = document.createElementNS('http://www.w3.org/2000/svg', tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  el.append(...children);
  return el;
}

export function when(ms: number | undefined): string {
  if (!ms) return '';
  const d = new Date(Number(ms));
  return d.toISOString().replace('T', ' ').slice(0, 19);
}

export function shortId(id: string | undefined, n = 8): string {
  if (!id) return '';
  const bare = id.replace(/^sha256:/, '').replace(/^s-/, '');
  return bare.length > n ? `${bare.slice(0, n)}…` : bare;
}

/** Components by digest, as their `describe()` named them (`echo 0.1.0`),
 * filled from `/v1/components` when the server is there. */
export const componentNames = new Map<string, string>();

/** A component as people know it: its name and version, else its digest. */
export function componentLabel(digest: string | undefined): string {
  if (!digest) return '';
  return componentNames.get(digest) ?? shortId(digest, 12);
}
