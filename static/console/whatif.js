// The held-model card's what-if: which racks and PDUs this model could not
// lose (the sweep, run when the card opens), and failing any one domain by
// hand. The server dry-runs placement and renders the lines; the page shows
// them as they are, as `llmgw ctl whatif` prints them.
(function () {
  "use strict";
  const { el } = LG;

  function sweepTable(m, data) {
    const mine = (data.hurt || []).flatMap((h) => h.below.filter((b) => b.model === m.name).map((b) => ({ h, b })));
    // Short before anything fails: said once, apart from what a failure adds.
    const short = (data.already_short || []).find((s) => s.model === m.name);
    const now = short ? el("p", { class: "already-short bad" }, `${m.name} is already at ${short.replicas} of ${short.always_running} always-running replicas, before any failure.`) : null;
    const summary = el("p", { class: "sweep-summary" }, mine.length
      ? [el("b", { class: "bad" }, `${mine.length} of ${data.tried}`), ` racks and PDUs would each, failing alone, leave ${m.name} below its ${m.always_running} always-running replicas:`]
      : [el("b", { class: "ok" }, `none of ${data.tried}`), ` racks and PDUs would, failing alone, leave ${m.name} below its ${m.always_running} always-running replicas.`]);
    if (!mine.length) return [now, summary].filter(Boolean);
    const rows = mine.map(({ h, b }) => el("tr", { "data-domain": h.domain }, [
      el("td", {}, el("a", { href: "#", class: "fail-link", "data-domain": h.domain }, h.domain)),
      el("td", {}, String(h.nodes)),
      // This model's replicas only: other models' losses are their cards'.
      el("td", {}, String(b.lost)),
      el("td", {}, String(b.not_replaced)),
      el("td", { class: "bad" }, `${b.replicas} of ${b.always_running}`),
    ]));
    return [...(now ? [now] : []), summary, el("table", { class: "grid sweep" }, [
      el("thead", {}, el("tr", {}, ["Domain", "Nodes", `${m.name} replicas lost`, "Cannot be placed again", `${m.name} left with`].map((h) => el("th", {}, h)))),
      el("tbody", {}, rows),
    ])];
  }

  function section(m) {
    const out = el("div", { class: "whatif-result", role: "status" });
    const sweepOut = el("div", { class: "whatif-sweep" }, el("p", { class: "dim" }, "Failing every rack and PDU in turn…"));
    const input = el("input", { name: "domain", placeholder: "rack=r07, pdu=p3 or a node", size: 28 });
    const fail = async (domain) => {
      out.replaceChildren("dry-running…");
      const r = await LG.request("GET", `/api/v1/whatif?fail=${encodeURIComponent(domain)}`);
      if (!r.ok) {
        const d = r.data || {};
        out.replaceChildren(el("div", { class: "refusal" }, [el("b", {}, "Refused: "), (d.fail || [d.detail || `HTTP ${r.status}`]).join("; ")]));
        return;
      }
      out.replaceChildren(el("pre", { class: "explanation whatif-lines" }, r.data.lines.join("\n")));
    };
    const form = el("form", { class: "whatif-form" }, [
      el("label", {}, ["Fail ", input]),
      el("button", { type: "submit" }, "Dry-run"),
    ]);
    form.addEventListener("submit", (e) => { e.preventDefault(); if (input.value.trim()) fail(input.value.trim()); });
    const nodes = [...new Set((m.replicas || []).flatMap((r) => r.nodes.map((n) => n.node)).filter(Boolean))];
    const quick = nodes.length ? el("p", { class: "dim" }, ["Its replicas' nodes: ", ...nodes.flatMap((n, i) => [i ? ", " : "",
      el("a", { href: "#", class: "fail-link", "data-domain": n }, n)])]) : null;
    if (!m.always_running) {
      sweepOut.replaceChildren(el("p", { class: "dim" }, "No always-running replica is held: no failure leaves it below its count."));
    } else {
      LG.getJSON("/api/v1/whatif/sweep")
        .then((data) => sweepOut.replaceChildren(...sweepTable(m, data)))
        .catch((e) => sweepOut.replaceChildren(el("p", { class: "bad" }, `sweep failed: ${e.message}`)));
    }
    const box = el("div", { class: "whatif", "data-model": m.name }, [sweepOut, quick, form, out]);
    // A domain named in the sweep or a replica's node fails with one click.
    box.addEventListener("click", (e) => {
      const a = e.target.closest("a.fail-link");
      if (!a) return;
      e.preventDefault();
      input.value = a.dataset.domain;
      fail(a.dataset.domain);
    });
    return box;
  }

  window.LG.whatif = section;
})();
