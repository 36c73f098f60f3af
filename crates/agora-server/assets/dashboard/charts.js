// The charts of the agora dashboard's overview and of the network demo's report.html, drawn with
// uPlot. A series object holds the x values (`t`: Unix seconds when `timeAxis`, else query
// numbers) and, per x, the requests answered by the LLM, by a routine, by a fallback and
// otherwise, their LLM cost and the routine share (percent, null when nothing was answered).
"use strict";
(function () {
  const COLORS = { llm: "#c0392b", routine: "#27ae60", fallback: "#e67e22", other: "#7f8c8d", cost: "#2c3e50", share: "#2980b9", correct: "#8e44ad" };

  function size(el) {
    return { width: Math.max(300, (el.clientWidth || 600) - 16), height: 220 };
  }

  function chart(el, title, timeAxis, xLabel, x, lines, yLabel) {
    el.textContent = "";
    const opts = Object.assign(size(el), {
      title: title,
      scales: { x: { time: timeAxis } },
      axes: [{ label: timeAxis ? "" : xLabel }, { label: yLabel }],
      series: [{ label: xLabel }].concat(lines.map((l) => ({
        label: l.label, stroke: l.color, width: 2, spanGaps: false,
        points: { show: x.length <= 120 },
      }))),
    });
    return new uPlot(opts, [x].concat(lines.map((l) => l.values)), el);
  }

  // Draws the three charts into the elements with these ids (those present).
  function render(series, ids) {
    const timeAxis = series.timeAxis !== false;
    const xLabel = series.xLabel || "time";
    const made = [];
    const requests = document.getElementById(ids.requests);
    if (requests) {
      made.push(chart(requests, requests.dataset.title || "Requests by path", timeAxis, xLabel, series.t, [
        { label: "LLM", color: COLORS.llm, values: series.llm },
        { label: "routine", color: COLORS.routine, values: series.routine },
        { label: "fallback", color: COLORS.fallback, values: series.fallback },
        { label: "rejected or failed", color: COLORS.other, values: series.other },
      ], "requests"));
    }
    const cost = document.getElementById(ids.cost);
    if (cost) {
      made.push(chart(cost, cost.dataset.title || "LLM cost (USD)", timeAxis, xLabel, series.t, [
        { label: "LLM cost", color: COLORS.cost, values: series.costUsd },
      ], "USD"));
    }
    const share = document.getElementById(ids.share);
    if (share) {
      const lines = [{ label: "routine share", color: COLORS.share, values: series.routineShare }];
      if (series.correctShare) {
        lines.push({ label: "judged correct", color: COLORS.correct, values: series.correctShare });
      }
      made.push(chart(share, share.dataset.title || "Routine share (%)", timeAxis, xLabel, series.t, lines, "%"));
    }
    return made;
  }

  window.agoraCharts = { render: render };
})();
