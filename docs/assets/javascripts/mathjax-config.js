// MathJax 3 for the manual's formulas (pymdownx.arithmatex, generic mode: \( ... \) and \[ ... \] inside
// elements of class "arithmatex"). MathJax itself is vendored beside this file (mathjax/: tex-chtml-full.js and
// its woff-v2 fonts from npm's mathjax@3.2.2, Apache-2.0, LICENSE there), so the manual renders offline, as the
// app does. To update: `npm pack mathjax@3`, then copy es5/tex-chtml-full.js and es5/output/chtml/fonts/woff-v2.
window.MathJax = {
  tex: {
    inline: [["\\(", "\\)"]],
    display: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
};
