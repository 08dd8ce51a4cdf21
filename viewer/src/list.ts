// A virtualised list: a scroller whose content is as tall as all rows, with
// only the rows in view (plus a margin) in the DOM, so a million-entry
// journal scrolls as smoothly as a hundred.
import { h } from './dom';

export const ROW_HEIGHT = 22;

export class VirtualList<T> {
  readonly el: HTMLElement;
  private readonly spacer: HTMLElement;
  private readonly layer: HTMLElement;
  private items: T[] = [];
  private drawn = '';
  private frame = 0;

  constructor(private readonly render: (item: T, index: number) => HTMLElement, label: string) {
    this.spacer = h('div', { class: 'vl-spacer' });
    this.layer = h('div', { class: 'vl-layer' });
    this.el = h('div', { class: 'vlist', role: 'list', 'aria-label': label, tabindex: '0' }, this.spacer, this.layer);
    this.el.addEventListener('scroll', () => this.schedule(), { passive: true });
  }

  /** The rows (the array is read, not copied: append to it and call `update`). */
  set(items: T[]): void {
    this.items = items;
    this.update();
  }

  update(): void {
    this.spacer.style.height = `${this.items.length * ROW_HEIGHT}px`;
    this.schedule();
  }

  private schedule(): void {
    if (this.frame) return;
    this.frame = requestAnimationFrame(() => {
      this.frame = 0;
      this.draw();
    });
  }

  private draw(): void {
    const top = this.el.scrollTop;
    const height = this.el.clientHeight || 400;
    const first = Math.max(0, Math.floor(top / ROW_HEIGHT) - 10);
    const last = Math.min(this.items.length, Math.ceil((top + height) / ROW_HEIGHT) + 10);
    const key = `${first}:${last}:${this.items.length}`;
    if (key === this.drawn) return;
    this.drawn = key;
    const rows: HTMLElement[] = [];
    for (let i = first; i < last; i++) {
      const row = this.render(this.items[i], i);
      row.style.top = `${i * ROW_HEIGHT}px`;
      rows.push(row);
    }
    this.layer.replaceChildren(...rows);
  }
}
