import keras  # noqa: F401 - keras.callbacks holds the tool


class ResumableTrainer:
    """Wraps model creation under a strategy and a resumable fit."""

    def __init__(self, strategy, build_and_compile, backup_dir):
        self.strategy = strategy
        self.build_and_compile = build_and_compile
        self.backup_dir = backup_dir
        self.model = None

    def build(self):
        with self.strategy.scope():
            self.model = self.build_and_compile()
        return self.model

    def fit(self, dataset, epochs, extra_callbacks):
        if self.model is None:
            self.build()
        cbs = list(extra_callbacks)
        cbs.insert(0, keras.callbacks.BackupAndRestore(self.backup_dir))
        self.model.fit(x=dataset, epochs=epochs, callbacks=cbs, verbose=0)
        return self.model


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    trainer = ResumableTrainer(strategy, build_and_compile, backup_dir)
    trainer.build()
    return trainer.fit(dataset, epochs, callbacks)
