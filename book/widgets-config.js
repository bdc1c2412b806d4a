// Runs between require.js and the widget manager on pages with stored widgets (nb_ipywidgets_js
// in _config.yml). The manager loads its icon fonts from where require.js says it lives, by
// default <page folder>/@jupyter-widgets/...: point that at the local copy in vendor/.
requirejs.config({
  paths: {
    "@jupyter-widgets/html-manager/dist": document.documentElement.dataset.content_root + "vendor/html-manager",
  },
});
