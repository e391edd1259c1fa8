// gpulab's code editor: CodeMirror 6 with Python, mounted over the exercise page's textarea.
// The textarea stays the form field: every change is copied back into it, so the form (and anyone
// without this bundle) keeps working. Tokens get CSS classes (tok-*), coloured by app.css, so the
// page's Content-Security-Policy needs no inline styles for highlighting.
import { closeBrackets, closeBracketsKeymap } from "@codemirror/autocomplete";
import { defaultKeymap, history, historyKeymap, indentWithTab } from "@codemirror/commands";
import { python } from "@codemirror/lang-python";
import { bracketMatching, foldGutter, foldKeymap, indentOnInput, indentUnit, syntaxHighlighting } from "@codemirror/language";
import { EditorState } from "@codemirror/state";
import {
  drawSelection, EditorView, highlightActiveLine, highlightActiveLineGutter, highlightSpecialChars, keymap, lineNumbers,
} from "@codemirror/view";
import { classHighlighter } from "@lezer/highlight";

const LONG_INPUT_CHARS = 1000;

function mount(textarea, options = {}) {
  const onSubmit = options.onSubmit || (() => false);
  const labelId = options.labelId || "";
  const view = new EditorView({
    parent: textarea.parentNode,
    state: EditorState.create({
      doc: textarea.value,
      extensions: [
        lineNumbers(),
        highlightActiveLineGutter(),
        highlightSpecialChars(),
        history(),
        foldGutter(),
        drawSelection(),
        indentOnInput(),
        indentUnit.of("    "),
        EditorState.tabSize.of(4),
        syntaxHighlighting(classHighlighter),
        bracketMatching(),
        closeBrackets(),
        highlightActiveLine(),
        python(),
        EditorView.lineWrapping,
        // Mod-Enter first, so it submits instead of inserting a line. Tab indents; Escape then Tab leaves.
        keymap.of([
          { key: "Mod-Enter", run: () => { onSubmit(); return true; } },
          ...closeBracketsKeymap, ...defaultKeymap, ...historyKeymap, ...foldKeymap, indentWithTab,
        ]),
        // Long text inserted as one "typed" input (what a paste becomes for some input methods, dictation or test
        // automation): one change of the document, instead of the browser editing the DOM line by line and
        // CodeMirror reading it back, which takes tens of seconds for a 150 KB paste.
        EditorView.domEventHandlers({
          beforeinput(event, view) {
            if (event.inputType !== "insertText" || !event.data || event.data.length < LONG_INPUT_CHARS) return false;
            event.preventDefault();
            view.dispatch(view.state.replaceSelection(event.data), { scrollIntoView: true, userEvent: "input.paste" });
            return true;
          },
        }),
        EditorView.updateListener.of((update) => {
          if (!update.docChanged) return;
          textarea.value = update.state.doc.toString();
          if (options.onChange) options.onChange();  // drafts: saved a moment after typing stops
        }),
        // The editor's own class through the view (CodeMirror rewrites its root's class list on every update, so a
        // class added by hand is gone after the first edit, and with it app.css's bounded height: the editor grew
        // with its content, a long paste drew every line).
        EditorView.editorAttributes.of({ class: "code-editor" }),
        // tabindex: the text is focusable content of the box that scrolls it (.cm-scroller), so keyboard users can
        // reach and scroll it, as axe's scrollable-region-focusable rule checks.
        EditorView.contentAttributes.of({
          tabindex: "0", "aria-labelledby": labelId, "aria-describedby": options.describedBy || "", spellcheck: "false",
          autocapitalize: "off", autocorrect: "off",
        }),
      ],
    }),
  });
  textarea.parentNode.insertBefore(view.dom, textarea.nextSibling);
  textarea.hidden = true;
  textarea.classList.add("enhanced");
  return {
    view,
    getValue: () => view.state.doc.toString(),
    setValue(text) {
      view.dispatch({ changes: { from: 0, to: view.state.doc.length, insert: text } });
    },
    focus: () => view.focus(),
  };
}

window.gpulabEditor = { mount };
