// Measured outcomes on a result (runner/measure.py): a table of each measurement beside its target, and a small
// SVG chart per measurement that carries one (bars: bytes per step; lines: modelled speed-up vs ranks).
// A modelled figure (runner/costmodel.py) is never shown without the word "modelled" and its basis. Plain
// static script, no library: everything from the server is inserted with textContent or SVG attributes.
"use strict";

window.gpulabMeasurements = (function () {
  const SVG = "http://www.w3.org/2000/svg";
  const COLOURS = ["#2f6fb0", "#c2571a", "#3d8b4f", "#8a4fb0"];

  function round(value) {
    if (value === null || value === undefined) return "–";
    const abs = Math.abs(value);
    if (abs >= 1e6) return (value / 1e6).toFixed(abs >= 1e8 ? 0 : 2).replace(/\.?0+$/, "") + " M";
    if (abs >= 1e4) return (value / 1e3).toFixed(1).replace(/\.0$/, "") + " k";
    if (Number.isInteger(value)) return String(value);
    return String(Math.round(value * 1000) / 1000);
  }

  function withUnit(value, unit) {
    return round(value) + (unit ? " " + unit : "");
  }

  function el(tag, text, className) {
    const node = document.createElement(tag);
    if (text !== undefined) node.textContent = text;
    if (className) node.className = className;
    return node;
  }

  function svg(tag, attrs, text) {
    const node = document.createElementNS(SVG, tag);
    for (const [key, value] of Object.entries(attrs || {})) node.setAttribute(key, String(value));
    if (text !== undefined) node.textContent = text;
    return node;
  }

  function chart(m) {
    const c = m.chart;
    const width = 360, height = 180, left = 48, right = 10, top = 14, bottom = 34;
    const all = c.series.flatMap((s) => s.points);
    const xs = all.map((p) => p[0]), ys = all.map((p) => p[1]);
    if (m.target !== null && c.kind === "bar") ys.push(m.target);
    const xMin = Math.min(...xs), xMax = Math.max(...xs);
    const yMax = Math.max(...ys, 0) || 1;
    const plotW = width - left - right, plotH = height - top - bottom;
    const sx = (x) => left + (xMax === xMin ? plotW / 2 : ((x - xMin) / (xMax - xMin)) * plotW);
    const sy = (y) => top + plotH - (y / yMax) * plotH;
    const root = svg("svg", { viewBox: `0 0 ${width} ${height}`, width, height, role: "img", class: "measure-chart" });
    const title = (m.modelled ? "Modelled: " : "") + m.name;
    root.appendChild(svg("title", {}, title));
    root.appendChild(svg("line", { x1: left, y1: top + plotH, x2: left + plotW, y2: top + plotH, stroke: "#666" }));
    root.appendChild(svg("line", { x1: left, y1: top, x2: left, y2: top + plotH, stroke: "#666" }));
    root.appendChild(svg("text", { x: left - 4, y: top + 4, "text-anchor": "end", "font-size": 10 }, round(yMax)));
    root.appendChild(svg("text", { x: left - 4, y: top + plotH, "text-anchor": "end", "font-size": 10 }, "0"));
    root.appendChild(svg("text", { x: left + plotW / 2, y: height - 4, "text-anchor": "middle", "font-size": 11 }, c.x_label));
    root.appendChild(svg("text", { x: 4, y: top - 4, "font-size": 11 }, c.y_label));
    const ticks = c.kind === "bar" ? c.series[0].points.map((p, i) => [left + (i + 0.5) * plotW / c.series[0].points.length, p[0]])
      : [...new Set(xs)].map((x) => [sx(x), x]);
    for (const [x, value] of ticks.slice(0, 16)) {
      root.appendChild(svg("text", { x, y: top + plotH + 12, "text-anchor": "middle", "font-size": 10 }, round(value)));
    }
    c.series.forEach((s, index) => {
      const colour = COLOURS[index % COLOURS.length];
      if (c.kind === "bar") {
        const slot = plotW / Math.max(1, s.points.length) / c.series.length;
        s.points.forEach((p, i) => {
          const x = left + (i * c.series.length + index) * slot + slot * 0.1;
          const bar = svg("rect", { x, y: sy(p[1]), width: slot * 0.8, height: top + plotH - sy(p[1]), fill: colour });
          bar.appendChild(svg("title", {}, `${c.x_label} ${round(p[0])}: ${round(p[1])} ${m.unit}`));
          root.appendChild(bar);
        });
      } else {
        const path = s.points.map((p, i) => (i ? "L" : "M") + sx(p[0]).toFixed(1) + " " + sy(p[1]).toFixed(1)).join(" ");
        root.appendChild(svg("path", { d: path, fill: "none", stroke: colour, "stroke-width": 2 }));
        for (const p of s.points) {
          const dot = svg("circle", { cx: sx(p[0]), cy: sy(p[1]), r: 3, fill: colour });
          dot.appendChild(svg("title", {}, `${c.x_label} ${round(p[0])}: ${round(p[1])}`));
          root.appendChild(dot);
        }
      }
      root.appendChild(svg("text", { x: left + 6, y: top + 12 + 12 * index, "font-size": 10, fill: colour }, s.label));
    });
    if (m.target !== null && c.kind === "bar") {
      const y = sy(m.target);
      root.appendChild(svg("line", { x1: left, y1: y, x2: left + plotW, y2: y, stroke: "#b00", "stroke-dasharray": "4 3" }));
      root.appendChild(svg("text", { x: left + plotW, y: y - 3, "text-anchor": "end", "font-size": 10, fill: "#b00" }, "target " + round(m.target)));
    }
    return root;
  }

  function render(section, measurements) {
    const list = measurements || [];
    section.replaceChildren();
    section.hidden = list.length === 0;
    if (!list.length) return;
    section.appendChild(el("h3", "Measurements"));
    const table = el("table", undefined, "measurements");
    const head = el("tr");
    for (const text of ["Measurement", "Value", "Target", ""]) head.appendChild(el("th", text));
    table.appendChild(el("thead")).appendChild(head);
    const body = el("tbody");
    const charts = el("div", undefined, "measure-charts");
    for (const m of list) {
      const row = el("tr", undefined, m.met === false ? "missed" : m.met ? "met" : "");
      const name = el("td");
      if (m.modelled) name.appendChild(el("span", "modelled", "badge modelled"));
      name.appendChild(document.createTextNode((m.modelled ? " " : "") + m.name));
      if (m.basis) name.appendChild(el("div", m.basis, "basis"));
      row.appendChild(name);
      row.appendChild(el("td", withUnit(m.value, m.unit), "num"));
      row.appendChild(el("td", m.target === null ? "–" : (m.compare === "==" ? "= " : (m.compare || "") + " ") + withUnit(m.target, m.unit), "num"));
      row.appendChild(el("td", m.met === null ? "" : m.met ? "met" : "missed"));
      body.appendChild(row);
      if (m.chart) {
        const figure = el("figure");
        figure.appendChild(chart(m));
        figure.appendChild(el("figcaption", (m.modelled ? "Modelled: " : "") + m.name));
        charts.appendChild(figure);
      }
    }
    table.appendChild(body);
    section.appendChild(table);
    if (charts.childElementCount) section.appendChild(charts);
  }

  return { render };
})();
