// The node page's Facility card: where the node sits (site, room, row, rack,
// PDU; operator labels win over the agent's) and the holds on its domains,
// with forms to set the one and place or release the other. Reads and
// writes the same API as `llmgw ctl label` and `llmgw ctl facility`.
(function () {
  "use strict";
  const { el, getJSON, request, DASH } = window.LG;
  const LEVELS = ["site", "room", "row", "rack", "pdu"];
  const root = document.getElementById("facility");
  if (!root) return;
  const name = document.getElementById("node").dataset.name;
  // Set by the page for an operator only: a viewer gets no form or button
  // that could only answer 403.
  const operate = document.getElementById("node").dataset.operate === "1";
  const kw = (w) => (w === null || w === undefined ? DASH : `${(w / 1000).toFixed(1)} kW`);

  function say(text, bad) {
    const note = root.querySelector(".facility-note");
    note.textContent = text;
    note.classList.toggle("bad", Boolean(bad));
  }

  async function act(method, url, body, done) {
    const r = await request(method, url, body);
    if (!r.ok) {
      const why = (r.data && (r.data.detail || JSON.stringify(r.data))) || r.status;
      say(`${method} ${url}: ${why}`, true);
      return;
    }
    say(done, false);
    await render();
  }

  function locationForm(labels) {
    const inputs = LEVELS.map((level) =>
      el("label", { style: "margin-right: .8em" }, [`${level} `, el("input", { name: level, value: labels[`llmgw.io/${level}`] || "", size: "10" })]));
    const form = el("form", { class: "facility-location" }, [...inputs, el("button", { type: "submit" }, "Set location")]);
    form.addEventListener("submit", (e) => {
      e.preventDefault();
      const body = {};
      for (const level of LEVELS) {
        const v = form.elements[level].value.trim();
        // Empty removes the operator's label; the agent's, if any, shows again.
        body[`llmgw.io/${level}`] = v || null;
      }
      act("POST", `/api/v1/nodes/${encodeURIComponent(name)}/labels`, { labels: body }, "location saved");
    });
    return form;
  }

  const holdText = (hold) =>
    `${hold.drained ? "held, drained" : hold.drain ? "draining" : "held"}: ${hold.reason}${hold.progress ? ` — ${hold.progress}` : ""}`;

  function holdRow(domain) {
    const hold = domain.hold;
    // The node itself, listed by the API only once held or capped: no
    // figures of its own here (its rack's and PDU's rows carry them).
    const listed = domain.listed !== false;
    const cells = [
      el("td", {}, domain.domain),
      el("td", {}, String(domain.nodes.length)),
      // Past its cap (as placement counts the draw): marked, with by how much.
      el("td", domain.over_cap_w ? { class: "bad over-cap", title: `${kw(domain.over_cap_w)} over its ${kw(domain.cap_w)} cap` } : {},
        listed ? `${kw(domain.draw_w)}${domain.unknown_nodes ? ` (+${domain.unknown_nodes} unknown)` : ""}${domain.over_cap_w ? ` — over cap by ${kw(domain.over_cap_w)}` : ""}` : ""),
      el("td", {}, listed ? kw(domain.cap_w) : ""),
    ];
    if (!operate) {
      cells.push(el("td", hold ? { class: "held" } : {}, hold ? holdText(hold) : DASH));
    } else if (hold) {
      const release = el("button", { type: "button" }, "Release");
      release.addEventListener("click", () =>
        act("DELETE", `/api/v1/facility/holds/${encodeURIComponent(domain.domain)}`, {}, `${domain.domain} released`));
      cells.push(el("td", { class: "held" }, holdText(hold)));
      cells.push(el("td", {}, release));
    } else {
      const reason = el("input", { placeholder: "reason", size: "16" });
      const drain = el("input", { type: "checkbox" });
      const button = el("button", { type: "button" }, "Hold");
      button.addEventListener("click", () =>
        act("POST", "/api/v1/facility/holds", { domain: domain.domain, reason: reason.value, drain: drain.checked },
          `${domain.domain} held`));
      cells.push(el("td", {}, DASH));
      cells.push(el("td", {}, [reason, el("label", {}, [drain, " drain"]), button]));
    }
    return el("tr", {}, cells);
  }

  async function render() {
    const [node, facility] = await Promise.all([
      getJSON(`/api/v1/nodes/${encodeURIComponent(name)}/`),
      getJSON("/api/v1/facility"),
    ]);
    const labels = node.labels || {};
    const mine = facility.domains.filter((d) => d.nodes.includes(name) || d.domain === name);
    if (!mine.some((d) => d.domain === name)) {
      mine.push({ domain: name, nodes: [name], hold: null, listed: false });
    }
    const path = LEVELS.map((l) => labels[`llmgw.io/${l}`]).filter(Boolean);
    const table = el("table", { class: "grid facility-domains" }, [
      el("thead", {}, el("tr", {}, ["Domain", "Nodes", "Draw", "Cap", "Hold", ...(operate ? [""] : [])].map((h) => el("th", {}, h)))),
      el("tbody", {}, mine.map(holdRow)),
    ]);
    const body = root.querySelector(".facility-body");
    body.replaceChildren(
      el("p", { class: "facility-where" }, path.length ? `Location: ${path.join(" / ")}` : "Location: - (no llmgw.io/ labels)"),
      operate ? locationForm(labels) : "",
      table,
    );
  }

  root.append(el("div", { class: "facility-body" }), el("p", { class: "facility-note" }, ""));
  render().catch((e) => say(String(e), true));
})();
