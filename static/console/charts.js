// Small line charts of an hour of PromQL, read through the control plane's
// proxy (/console/api/promql). A chart with no Prometheus says so instead of
// drawing an empty frame that reads like "zero".
(function () {
  "use strict";
  const W = 320, H = 136, M = { t: 8, r: 10, b: 34, l: 58 };
  const PALETTE = ["#4c8dff", "#2ec4b6", "#e0a526", "#c77dff", "#ff6b6b", "#8ac926", "#ff9f1c", "#5bc0eb"];

  async function range(query) {
    const r = await LG.request("GET", `/console/api/promql?seconds=3600&query=${encodeURIComponent(query)}`);
    if (r.data && r.data.configured === false) return { configured: false };
    if (!r.ok || !r.data || r.data.status !== "success") {
      return { configured: true, error: (r.data && (r.data.detail || r.data.error)) || `HTTP ${r.status}` };
    }
    return { configured: true, series: r.data.data.result };
  }

  function frame(container, title) {
    const box = LG.el("div", { class: "chart" }, [LG.el("h4", { text: title })]);
    container.append(box);
    return box;
  }

  const zoneOf = (t) => (new Intl.DateTimeFormat(undefined, { timeZoneName: "short" })
    .formatToParts(t).find((p) => p.type === "timeZoneName") || {}).value || "";
  const day = (t) => t.toLocaleDateString(undefined, { day: "numeric", month: "short", year: "numeric" });
  const hm = d3.timeFormat("%H:%M");
  // Under the time axis: the day and the zone its "11:47" ticks are in.
  function span([a, b]) {
    const days = day(a) === day(b) ? day(a) : `${day(a)} – ${day(b)}`;
    return `${days}, ${hm(a)}–${hm(b)} ${zoneOf(b)}`;
  }

  // Bytes ticked at round binary sizes (128 GiB, 256 GiB), not at the
  // decimal ones (93.1 GiB) a plain scale picks; the scale's top is made one.
  // Their labels as short as the values are round: "16 GiB", not "16.0 GiB".
  const BINARY = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
  function byteTicks(y, top) {
    const k = Math.min(BINARY.length - 1, Math.max(0, Math.floor(Math.log(top) / Math.log(1024))));
    const unit = 1024 ** k;
    const [, hi] = d3.nice(0, top / unit, 4);
    y.domain([0, hi * unit]);
    return { values: d3.ticks(0, hi, 4).map((t) => t * unit), format: (v) => `${d3.format("~g")(v / unit)} ${BINARY[k]}` };
  }

  // Hovering a chart reads its series at that moment, with the full time.
  function readout(svg, box, x, series, unit) {
    const at = box.querySelector(".readout") || box.appendChild(LG.el("p", { class: "readout dim" }, " "));
    const rule = svg.append("line").attr("class", "hover-rule").attr("y1", M.t).attr("y2", H - M.b).style("display", "none");
    const bisect = d3.bisector((p) => p[0]).center;
    svg.append("rect").attr("class", "hover-area").attr("x", M.l).attr("y", M.t).attr("fill", "transparent")
      .attr("width", W - M.l - M.r).attr("height", H - M.t - M.b)
      .on("mousemove", (ev) => {
        const t = x.invert(d3.pointer(ev)[0]);
        rule.attr("x1", x(t)).attr("x2", x(t)).style("display", null);
        const vals = series.filter((s) => s.points.length).map((s) => {
          const p = s.points[bisect(s.points, t)];
          return `${s.name}: ${unit(p[1])}`;
        });
        at.textContent = `${LG.full(t.toISOString())} · ${vals.join(" · ")}`;
      })
      .on("mouseleave", () => { rule.style("display", "none"); at.textContent = " "; });
  }

  // spec: {title, query, unit: fmt function, axis: the unit's words,
  //        label: series => its name, legend: false where the title names the one series}
  async function draw(container, spec) {
    const box = spec.box || frame(container, spec.title);
    spec.box = box;
    const got = await range(spec.query);
    box.querySelectorAll("svg, .note, .legend, .readout").forEach((n) => n.remove());
    if (!got.configured) { box.append(LG.el("p", { class: "note" }, "Prometheus is not configured (LLMGW_PROMETHEUS_URL)")); return got; }
    if (got.error) { box.append(LG.el("p", { class: "note bad" }, `Prometheus: ${got.error}`)); return got; }
    const series = got.series.map((s, i) => ({
      name: spec.label ? spec.label(s.metric) : (s.metric.node || ""),
      color: PALETTE[i % PALETTE.length],
      points: s.values.map(([t, v]) => [new Date(t * 1000), Number(v)]).filter((p) => isFinite(p[1])),
    }));
    if (!series.length || !series.some((s) => s.points.length)) {
      box.append(LG.el("p", { class: "note" }, "no samples in the last hour"));
      return got;
    }
    const all = series.flatMap((s) => s.points);
    const x = d3.scaleTime().domain(d3.extent(all, (p) => p[0])).range([M.l, W - M.r]);
    const top = spec.max || d3.max(all, (p) => p[1]) || 1;
    const y = d3.scaleLinear().domain([0, top]).range([H - M.b, M.t]);
    const unit = spec.unit || d3.format("~g");
    const ticks = spec.unit === LG.fmt.bytes ? byteTicks(y, top) : (y.nice(), { values: null, format: unit });
    const svg = d3.select(box).append("svg").attr("viewBox", `0 0 ${W} ${H}`).attr("class", "line-chart");
    svg.append("g").attr("class", "axis x").attr("transform", `translate(0,${H - M.b})`)
      .call(d3.axisBottom(x).ticks(4).tickFormat(hm).tickSizeOuter(0));
    svg.append("g").attr("class", "axis y").attr("transform", `translate(${M.l},0)`)
      .call(d3.axisLeft(y).ticks(4).tickValues(ticks.values).tickFormat(ticks.format));
    svg.append("text").attr("class", "axis-label x").attr("x", (M.l + W - M.r) / 2).attr("y", H - 4)
      .attr("text-anchor", "middle").text(span(x.domain()));
    if (spec.axis) {
      svg.append("text").attr("class", "axis-label y").attr("transform", `translate(11,${(M.t + H - M.b) / 2}) rotate(-90)`)
        .attr("text-anchor", "middle").text(spec.axis);
    }
    const line = d3.line().x((p) => x(p[0])).y((p) => y(p[1]));
    svg.selectAll("path.series").data(series).join("path").attr("class", "series")
      .attr("fill", "none").attr("stroke", (s) => s.color).attr("stroke-width", 1.6).attr("d", (s) => line(s.points));
    readout(svg, box, x, series, unit);
    if (spec.legend !== false && (series.length > 1 || spec.label)) {
      box.append(LG.el("div", { class: "legend" }, series.map((s) =>
        LG.el("span", {}, [LG.el("i", { style: `background:${s.color}` }), s.name]))));
    }
    return got;
  }

  window.Charts = { draw };
})();
