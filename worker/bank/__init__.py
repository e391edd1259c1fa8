"""The exercise bank's format: exercise folders (``spec``) and quizzes (``quiz``): read, checked, written."""
