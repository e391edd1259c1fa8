import keras


def train(strategy, build_and_compile, dataset, epochs, backup_dir, callbacks):
    """Build and compile the model under `strategy` (call build_and_compile()), fit it on `dataset` for
    `epochs` epochs with `callbacks`, and return it. A run that is killed part-way and started again with the
    same backup_dir must continue from the last completed epoch, with the optimizer's state."""
    with strategy.scope():
        model = build_and_compile()
    # Mistake: a backup from the middle of an epoch; a restart trains that epoch again on top of it
    # back up after every batch so that a kill loses as little work as possible
    backup = keras.callbacks.BackupAndRestore(backup_dir=backup_dir, save_freq=1)
    model.fit(dataset, epochs=epochs, callbacks=[backup, *list(callbacks)], verbose=0)
    return model
